"""The on-disk layout shared with Megatron-Energon: tar indexes and the `.nv-meta` files."""
