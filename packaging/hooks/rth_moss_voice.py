"""PyInstaller runtime hook: runs in the bundle before the app's own code.

Hugging Face libraries start offline, so nothing reaches the network by accident; the model
manager lifts this for its own downloads only (app.hub_offline.hub_online, used by
app.model_store). A flag the person set themselves is kept.
"""

from app.hub_offline import apply_offline_defaults

apply_offline_defaults()
