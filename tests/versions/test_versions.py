"""registry.versions.semver: semver 2.0 parsing and precedence, the SQL sort key, ranges and resolution."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.versions.semver import (
    InvalidRange,
    InvalidVersion,
    Version,
    parse_range,
    resolve,
)

V = Version.parse


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("0.0.0", (0, 0, 0, (), "")),
        ("1.2.3", (1, 2, 3, (), "")),
        ("10.20.30", (10, 20, 30, (), "")),
        ("1.0.0-alpha", (1, 0, 0, ("alpha",), "")),
        ("1.0.0-alpha.1", (1, 0, 0, ("alpha", "1"), "")),
        ("1.0.0-0.3.7", (1, 0, 0, ("0", "3", "7"), "")),
        ("1.0.0-x.7.z.92", (1, 0, 0, ("x", "7", "z", "92"), "")),
        ("1.0.0-x-y-z.--", (1, 0, 0, ("x-y-z", "--"), "")),
        ("1.0.0-0a.01a", (1, 0, 0, ("0a", "01a"), "")),
        ("1.0.0+20130313144700", (1, 0, 0, (), "20130313144700")),
        ("1.0.0-beta+exp.sha.5114f85", (1, 0, 0, ("beta",), "exp.sha.5114f85")),
        ("1.0.0+001", (1, 0, 0, (), "001")),
        ("99999999999999999999.0.0", (99999999999999999999, 0, 0, (), "")),
    ],
)
def test_parse_valid_versions(text: str, fields: tuple) -> None:
    version = V(text)
    assert (version.major, version.minor, version.patch, version.prerelease, version.build) == fields
    assert str(version) == text
    assert version.is_prerelease == bool(fields[3])


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1",
        "1.2",
        "1.2.3.4",
        "v1.2.3",
        "01.2.3",
        "1.02.3",
        "1.2.03",
        "1.2.3-01",
        "1.2.3-",
        "1.2.3+",
        "1.2.3-alpha..1",
        "1.2.3+build..1",
        "1.2.3-al$pha",
        " 1.2.3",
        "1.2.3 ",
        "1.2.3\n",
        "1.2.٣",  # a non-ASCII digit
        "-1.2.3",
        "1.2.3-" + "a" * 130,
        "100000000000000000000.0.0",  # 21 digits: beyond the sort key's width
    ],
)
def test_parse_rejects_non_semver(text: str) -> None:
    with pytest.raises(InvalidVersion):
        V(text)


def test_invalid_version_is_a_value_error_and_construction_is_validated() -> None:
    assert issubclass(InvalidVersion, ValueError)
    with pytest.raises(InvalidVersion):
        Version(1, 2, -1)
    with pytest.raises(InvalidVersion):
        Version(1, 2, 3, ("01",))


SPEC_CHAIN = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "2.0.0",
    "2.1.0",
    "2.1.1",
]


def test_precedence_follows_the_semver_spec_example() -> None:
    versions = [V(text) for text in SPEC_CHAIN]
    for lower, higher in itertools.pairwise(versions):
        assert lower < higher and higher > lower and lower <= higher and not higher <= lower
        assert lower.sort_key() < higher.sort_key()
    assert sorted(reversed(versions)) == versions
    assert sorted(reversed(versions), key=Version.sort_key) == versions


def test_build_metadata_is_ignored_for_ordering_but_kept_in_text() -> None:
    a, b = V("1.0.0+build.1"), V("1.0.0+build.2")
    assert a == b and hash(a) == hash(b) and not a < b and not b < a
    assert a.sort_key() == b.sort_key() == V("1.0.0").sort_key()
    assert str(a) == "1.0.0+build.1"


def test_sort_key_shape() -> None:
    assert V("1.2.3").sort_key() == "00000000000000000001.00000000000000000002.00000000000000000003~"
    # numeric identifiers compare by value (2 < 11), not as text
    assert V("1.0.0-2").sort_key() < V("1.0.0-11").sort_key()
    # numeric < alphanumeric; shorter list first; a prefix identifier first
    assert V("1.0.0-99").sort_key() < V("1.0.0-a").sort_key()
    assert V("1.0.0-alpha").sort_key() < V("1.0.0-alpha.0").sort_key() < V("1.0.0-alpha-x").sort_key()


# Identifiers built to hit the tricky cases: digits only, prefixes of each other, "-" (the lowest
# identifier character), and upper before lower case.
_alphanumeric = st.text(alphabet="-0aAzZ9", min_size=1, max_size=4).filter(lambda s: not s.isdigit())
_numeric = st.integers(min_value=0, max_value=10**20 - 1).map(str)
_small = st.integers(min_value=0, max_value=3) | st.integers(min_value=0, max_value=10**20 - 1)
versions = (
    st.tuples(
        _small,
        _small,
        _small,
        st.lists(_numeric | _alphanumeric, max_size=4).map(tuple),
        st.sampled_from(["", "b1", "exp.sha.5"]),
    )
    .filter(lambda fields: len(str(Version(*fields[:3])) + ".".join(fields[3]) + fields[4]) <= 120)
    .map(lambda fields: Version(*fields))
)


@settings(max_examples=300, deadline=None)
@given(versions, versions)
def test_sort_key_order_equals_version_order(a: Version, b: Version) -> None:
    assert (a < b) == (a.sort_key() < b.sort_key())
    assert (a == b) == (a.sort_key() == b.sort_key())
    assert a.sort_key().isascii()


@settings(max_examples=100, deadline=None)
@given(st.lists(versions, min_size=2, max_size=12))
def test_sorting_by_sort_key_is_sorting_by_precedence(items: list[Version]) -> None:
    by_key = [v.sort_key() for v in sorted(items, key=Version.sort_key)]
    by_precedence = [v.sort_key() for v in sorted(items)]
    assert by_key == by_precedence


@settings(max_examples=200, deadline=None)
@given(versions)
def test_text_round_trips(version: Version) -> None:
    parsed = V(str(version))
    assert parsed == version
    assert str(parsed) == str(version)
    assert parsed.build == version.build


@pytest.mark.parametrize(
    ("spec", "matching", "not_matching"),
    [
        ("^2", ["2.0.0", "2.1.0", "2.99.99"], ["1.9.9", "3.0.0", "2.1.0-beta", "3.0.0-alpha"]),
        ("^2.1", ["2.1.0", "2.9.0"], ["2.0.9", "3.0.0"]),
        ("^2.1.3", ["2.1.3", "2.5.0"], ["2.1.2", "3.0.0"]),
        ("^0.3", ["0.3.0", "0.3.9"], ["0.2.9", "0.4.0", "1.0.0"]),
        ("^0.0.3", ["0.0.3"], ["0.0.4", "0.1.0"]),
        ("^0", ["0.0.0", "0.9.9"], ["1.0.0"]),
        ("~2", ["2.0.0", "2.9.9"], ["3.0.0", "1.9.9"]),
        ("~2.1", ["2.1.0", "2.1.9"], ["2.2.0", "2.0.9"]),
        ("~2.1.3", ["2.1.3", "2.1.9"], ["2.1.2", "2.2.0"]),
        (">=2,<3", ["2.0.0", "2.9.9"], ["1.9.9", "3.0.0", "3.0.0-rc.1", "2.5.0-rc.1"]),
        (">=2.1 <3", ["2.1.0", "2.9.0"], ["2.0.9", "3.0.0"]),
        (">=2, <3", ["2.4.0"], ["3.1.0"]),
        (">1.2", ["1.3.0", "2.0.0"], ["1.2.9"]),
        (">1.2.3", ["1.2.4"], ["1.2.3"]),
        ("<=1.2", ["1.2.9", "0.1.0"], ["1.3.0"]),
        ("<1.2", ["1.1.9"], ["1.2.0"]),
        ("=1.2.3", ["1.2.3", "1.2.3+build"], ["1.2.4"]),
        ("2.1.0", ["2.1.0"], ["2.1.1"]),
        ("2", ["2.0.0", "2.3.4"], ["3.0.0"]),
        ("*", ["0.0.1", "5.0.0"], ["5.0.0-rc.1"]),
        # naming a pre-release admits pre-releases of that same MAJOR.MINOR.PATCH only
        (">=2.1.0-beta", ["2.1.0-beta", "2.1.0-rc.1", "2.1.0", "3.0.0"], ["2.1.0-alpha", "2.2.0-rc.1"]),
        ("^1.2.3-beta.2", ["1.2.3-beta.2", "1.2.3-beta.11", "1.9.0"], ["1.2.3-beta.1", "1.3.0-beta", "2.0.0"]),
    ],
)
def test_ranges(spec: str, matching: list[str], not_matching: list[str]) -> None:
    version_range = parse_range(spec)
    assert str(version_range) == spec
    for text in matching:
        assert version_range.matches(V(text)), f"{spec} should match {text}"
    for text in not_matching:
        assert not version_range.matches(V(text)), f"{spec} should not match {text}"


@pytest.mark.parametrize(
    "spec",
    [
        "",
        " ",
        "^",
        "~",
        ">=",
        ">=x",
        "2.x.y",
        "2.x",
        "x",
        ">=2,,<3",
        ">=2,",
        ",>=2",
        "^v2",
        ">= 2",
        "1.2.3 || 2",
        "1.0.0 - 2.0.0",
        "^02",
        "latest",
        "^2.1.3.4",
        ">=2.1-beta",
        "*.*",
        "^" + "9" * 21,
        "^" + "1" * 300,
    ],
)
def test_malformed_ranges(spec: str) -> None:
    with pytest.raises(InvalidRange):
        parse_range(spec)
    assert issubclass(InvalidRange, ValueError)


PUBLISHED = [V(t) for t in ["1.0.0", "1.4.0", "2.0.0", "2.1.0", "2.2.0-rc.1", "3.0.0-beta.1", "3.0.0-beta.2"]]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("latest", "2.1.0"),
        ("^2", "2.1.0"),
        ("^1", "1.4.0"),
        ("~1.0", "1.0.0"),
        (">=2,<3", "2.1.0"),
        ("2.2.0-rc.1", "2.2.0-rc.1"),  # exact pre-release requests are honoured
        (">=2.2.0-rc.0", "2.2.0-rc.1"),
        ("^3.0.0-beta.1", "3.0.0-beta.2"),
        ("2.0.0", "2.0.0"),
        ("2.0.0+anybuild", None),  # build metadata in an exact request must match
        ("2.0.1", None),
        ("^4", None),
        ("^3", None),  # only pre-releases in that line
        ("*", "2.1.0"),
    ],
)
def test_resolve(spec: str, expected: str | None) -> None:
    found = resolve(spec, PUBLISHED)
    assert (None if found is None else str(found)) == expected


def test_resolve_latest_skips_prereleases_and_handles_empty_sets() -> None:
    assert resolve("latest", [V("1.0.0-rc.1"), V("0.9.0-beta")]) is None
    assert resolve("latest", []) is None
    assert resolve("latest", [V("0.1.0"), V("1.0.0-rc.1")]) == V("0.1.0")
    # an iterator is consumed once
    assert resolve("^1", iter([V("1.0.0"), V("1.1.0")])) == V("1.1.0")


def test_resolve_exact_with_build_metadata() -> None:
    stored = [V("1.0.0+b7")]
    assert str(resolve("1.0.0", stored)) == "1.0.0+b7"
    assert str(resolve("1.0.0+b7", stored)) == "1.0.0+b7"
    assert resolve("1.0.0+b8", stored) is None


def test_an_exact_request_never_resolves_to_another_build() -> None:
    """One version per precedence: an exact request answers its own text, never a twin of it (twins stored
    before registration refused them leave a build-less request ambiguous: None, never a guess)."""
    twins = [V("1.0.0+hotfix"), V("1.0.0")]
    assert str(resolve("1.0.0", twins)) == "1.0.0"
    assert str(resolve("1.0.0+hotfix", twins)) == "1.0.0+hotfix"
    assert resolve("1.0.0", [V("1.0.0+a"), V("1.0.0+b")]) is None


@pytest.mark.parametrize("spec", ["^", "2.x.y", ">=2,,<3", "v1.0.0", "", "01.0.0"])
def test_resolve_rejects_malformed_specs(spec: str) -> None:
    with pytest.raises(InvalidRange):
        resolve(spec, PUBLISHED)
