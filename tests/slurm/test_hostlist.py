"""Hostlist expansion: a table of expressions, the errors, and a round trip over generated lists."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler_adapters.slurm.hostlist import MAX_HOSTS, HostlistError, expand_hostlist

EXPANSIONS = [
    ("n1", ["n1"]),
    ("n[1-3,5]", ["n1", "n2", "n3", "n5"]),
    ("gpu-[01-04]", ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]),
    ("n[08-11]", ["n08", "n09", "n10", "n11"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("n1,n[3-4],gpu-[08-09]", ["n1", "n3", "n4", "gpu-08", "gpu-09"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("rack[1-2]-gpu[7]-ib", ["rack1-gpu7-ib", "rack2-gpu7-ib"]),
    ("n[5,1-2]", ["n5", "n1", "n2"]),  # order kept, as scontrol show hostnames keeps it
    ("n1,n1", ["n1", "n1"]),
    ("node.example.org", ["node.example.org"]),
    (" n[1-2] ", ["n1", "n2"]),
    ("", []),
    ("(null)", []),
    (None, []),
]


@pytest.mark.parametrize(("text", "hosts"), EXPANSIONS)
def test_expand(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("n[1-3", "unclosed"),
        ("n1-3]", "unbalanced"),
        ("n[[1-2]]", "nested"),
        ("n[3-1]", "descending"),
        ("n[a-c]", "bad range"),
        ("n[1-]", "bad range"),
        ("n[]", "bad range"),
        ("n[1-2],,n3", "empty host name"),
        ("n 1", "white space"),
        ("n[\uff11-\uff12]", "bad range"),  # full-width digits: str.isdigit says yes, Slurm no
        (f"n[1-{MAX_HOSTS + 1}]", "more than"),
        ("a[1-1000]b[1-1000]", "more than"),
    ],
)
def test_rejects(text, complaint):
    with pytest.raises(HostlistError, match=complaint):
        expand_hostlist(text)


def test_error_is_a_value_error():
    assert issubclass(HostlistError, ValueError)


# A generated list of (prefix, [(first, last, width)]) written as a hostlist expression must
# expand to exactly the names built directly.
_range = st.tuples(st.integers(0, 50), st.integers(0, 5), st.integers(1, 3)).map(lambda t: (t[0], t[0] + t[1], t[2]))
_group = st.tuples(st.from_regex(r"[a-z][a-z0-9-]{0,6}", fullmatch=True), st.lists(_range, min_size=1, max_size=3))


@given(st.lists(_group, min_size=1, max_size=4))
def test_generated_lists_round_trip(groups):
    parts, expected = [], []
    for prefix, ranges in groups:
        body = ",".join(f"{lo:0{w}d}-{hi:0{w}d}" for lo, hi, w in ranges)
        parts.append(f"{prefix}[{body}]")
        for lo, hi, w in ranges:
            expected.extend(f"{prefix}{n:0{w}d}" for n in range(lo, hi + 1))
    assert expand_hostlist(",".join(parts)) == expected
