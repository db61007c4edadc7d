"""Pipeline stages: one class per file, each following the contract of ``energon_lite.stages.base``."""
