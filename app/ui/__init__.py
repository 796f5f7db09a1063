"""The PySide6 user interface. Renders events and sends commands; never imports torch."""
