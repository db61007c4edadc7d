"""A batch's ``__restore_key__`` travels as columns and arrives as the same plain list."""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler

from energon_lite.state.restore_key import BatchRestoreKeys, PackKey, SampleKey, SubKey


def _keys(n: int) -> list[SampleKey]:
    return [SampleKey(leaf=i % 2, shard=i // 4, sample=1000 + i, epoch=3) for i in range(n)]


def test_sample_keys_come_back_equal_as_a_plain_list_of_sample_keys():
    keys = _keys(9)
    sent = BatchRestoreKeys(keys)
    assert sent == keys and repr(sent) == repr(keys)
    data = ForkingPickler.dumps(sent)
    assert len(data) < len(ForkingPickler.dumps(keys))  # columns, not 9 reduce calls
    back = pickle.loads(data)
    assert type(back) is list and back == keys
    assert all(type(key) is SampleKey for key in back)
    assert [key._asdict() for key in back] == [key._asdict() for key in keys]


def test_other_keys_or_a_mix_travel_one_by_one():
    mixed = [*_keys(2), SubKey(_keys(1)[0], 1), PackKey((_keys(1)[0],))]
    back = pickle.loads(pickle.dumps(BatchRestoreKeys(mixed)))
    assert type(back) is list and back == mixed
    assert [type(key) for key in back] == [SampleKey, SampleKey, SubKey, PackKey]
    assert pickle.loads(pickle.dumps(BatchRestoreKeys())) == []
