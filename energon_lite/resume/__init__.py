"""Everything about a saved rank state: the typed record, its one check, saving and
restoring on the same layout, elastic redistribution, canonical relayout and the deltas a
worker sends. Stages keep their own fields; they never see a rank state."""
