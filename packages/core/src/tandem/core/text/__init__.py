"""Between token ids and text: the tokenizer, the decoder and the streaming detokenizer."""
