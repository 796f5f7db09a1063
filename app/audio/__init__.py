"""Audio input and output behind one interface; never imports Qt."""
