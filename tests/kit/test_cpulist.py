"""The kernel's CPU list format, read once."""

from __future__ import annotations

import pytest

from hairline.kit.cpulist import parse_cpu_list


def test_numbers_and_ranges_are_the_cpus_they_name_sorted_once_each() -> None:
    assert parse_cpu_list("0-3,8,10-11") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpu_list("3,2,2-3") == (2, 3)
    assert parse_cpu_list(" 5 ") == (5,)


def test_an_empty_list_names_no_cpu() -> None:
    assert parse_cpu_list("") == ()
    assert parse_cpu_list(" , ") == ()


@pytest.mark.parametrize("text", ["a", "3-", "-1", "5-2", "1-2-3"])
def test_what_is_not_a_cpu_list_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpu_list(text)
