"""The one generic registry behind tasks, mixtures and objectives."""

import pytest

from t2t.errors import T2TError
from t2t.registry import Registry


def test_register_directly_or_as_a_decorator():
    colours = Registry("colour")
    assert colours.register("red", "#f00") == "#f00"

    @colours.register("blue")
    def blue():
        return "#00f"

    assert colours.get("blue") is blue and blue() == "#00f"  # the decorator gives the function back
    assert colours.items() == [("blue", blue), ("red", "#f00")]  # name order


def test_duplicates_are_errors_and_unknown_names_point_to_known_ones():
    colours = Registry("colour")
    colours.register("red", 1)
    colours.alias("r", "red")
    with pytest.raises(T2TError, match="colour 'red' is already registered"):
        colours.register("red", 2)
    with pytest.raises(T2TError, match="colour 'r' is already registered"):
        colours.register("r", 2)
    with pytest.raises(T2TError, match=r"unknown colour 'rde'; did you mean red, r\?"):
        colours.get("rde")
    with pytest.raises(T2TError, match=r"unknown colour 'blue'; the registered names are r, red\.$"):
        colours.get("blue")
    many = Registry("task")
    for i in range(30):
        many.register(f"task_{i:02d}", i)
    with pytest.raises(T2TError, match=r"unknown task 'zzz'; run `t2t-tasks` to list the registered names\.$"):
        many.get("zzz")
