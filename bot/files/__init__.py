"""Files people share, turned into model input.

`prepare` holds the per-file rules; `intake` the limits and the bounded download; `sniff` tells
text from images from everything else by the bytes; `text` and `images` fit each kind; `vision`
decides whether images go as image parts; `image_cost` keeps the token budget honest about them.
(No re-exports here: `bot.tokens` imports `image_cost`, which must not pull the rest in.)
"""
