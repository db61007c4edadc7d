"""The user's hooks: ``TaskEncoder`` and its defaults (``base``), cooking crude samples
(``cooking``), packing helpers, ``AugmentTaskEncoder`` and the indices its hooks read."""
