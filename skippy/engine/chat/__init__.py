"""Chat templates and formats: rendering (jinja2 sandbox), template capabilities, tool history and
emulation, the parse plan, and the chat-format output parsers (``formats/``)."""
