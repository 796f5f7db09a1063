"""MOSS Voice: an offline desktop voice assistant for the MOSS-Speech speech-to-speech model."""

__version__ = "0.1.0"
APP_NAME = "MOSS Voice"
APP_ID = "moss-voice"
