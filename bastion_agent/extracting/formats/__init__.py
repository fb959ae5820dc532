"""One module per file format, each a pure function from bytes to text.

``base`` holds what they share (the ``Refused`` signal, the reasons, text
decoding); ``bastion_agent.extracting.readers`` picks the format and turns a refusal
into a counted reason.
"""
