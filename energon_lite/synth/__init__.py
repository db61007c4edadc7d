"""Writers of real test data (image shards, videos, video-text tables, HDF5 episodes).

The demo, the benchmarks and the tests share them: ``shards`` needs only the base install,
``av`` and ``video_text`` need PyAV (``pip install energon-lite[av]``), ``episodes`` h5py.
"""
