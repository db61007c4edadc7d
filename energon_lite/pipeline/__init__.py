"""Wiring one worker chain from the task encoder's hooks and the loader arguments
(``DatasetPipeline``), and how many samples and batches each worker reads (``lengths``)."""
