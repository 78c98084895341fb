"""The argument checks every public door uses: what they accept, and the words they refuse with."""

import itertools

import pytest

from kvlab.core.checks import check_instance, check_items, check_mapping


class Thing:
    pass


def test_check_instance_returns_the_value_or_names_what_was_wanted():
    thing = Thing()
    assert check_instance("plan", thing, Thing) is thing
    with pytest.raises(TypeError, match=r"^plan must be a Thing, got None \(NoneType\)$"):
        check_instance("plan", None, Thing)
    with pytest.raises(TypeError, match=r"^exc must be an Exception or int, got 'x' \(str\)$"):
        check_instance("exc", "x", (Exception, int))


def test_check_mapping_refuses_empty_mappings_and_names_the_bad_entry():
    thing = Thing()
    assert check_mapping("runs", {"a": thing}, Thing, "policy -> Thing") == {"a": thing}
    with pytest.raises(ValueError, match=r"runs must be a non-empty mapping \(policy -> Thing\)"):
        check_mapping("runs", {}, Thing, "policy -> Thing")
    with pytest.raises(TypeError, match=r"runs\['b'\] must be a Thing, got 3"):
        check_mapping("runs", {"a": thing, "b": 3}, Thing, "policy -> Thing")
    with pytest.raises(TypeError, match="runs must be a Mapping"):
        check_mapping("runs", [thing], Thing, "policy -> Thing")


def test_check_items_refuses_text_mappings_and_endless_iterators():
    assert check_items("xs", (1, 2)) == [1, 2]
    for bad in ("ab", {"a": 1}, 5):
        with pytest.raises(TypeError, match="xs must be a sequence of items"):
            check_items("xs", bad)
    with pytest.raises(ValueError, match="xs must hold at most 3 items, got more"):
        check_items("xs", itertools.count(), max_items=3)
