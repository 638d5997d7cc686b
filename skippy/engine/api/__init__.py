"""Other APIs served as translations onto the Chat Completions path (sans-IO): request in, chat request out;
chat replies in, that API's replies out. No second generation path."""
