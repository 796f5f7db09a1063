"""The conversation: turn-taking, the engine worker, the wired pipeline, metrics, simulation.

Never imports Qt. The UI talks to a :class:`app.conversation.pipeline.Pipeline` only through
:class:`app.events.ConversationPort`.
"""
