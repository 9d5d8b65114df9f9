import json

import pytest


def test_plain_json():
    assert json.loads("[1, 2]") == [1, 2]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_plain_param(n):
    assert n * 2 > n


def test_plain_strings():
    assert "-".join(["a", "b"]) == "a-b"
