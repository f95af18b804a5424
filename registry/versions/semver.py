"""Capability versions: semver 2.0 versions, version ranges, and resolving a version request.

Owns:
- `Version`: strict semver 2.0 parsing, precedence ordering, and `sort_key()`, a string whose plain
  bytewise order (PostgreSQL `COLLATE "C"`) is semver precedence, for an indexed column.
- `parse_range` / `VersionRange`: npm-style ranges (exact, `^`, `~`, comparator sets, `*`).
- `resolve`: answering `latest`, an exact version or a range from a set of versions.

Pure: no I/O and no clock. Callers drop retired and not-yet-effective versions before resolving.

Equality and hashing follow precedence, so build metadata is ignored by `==` just as it is by
ordering (`1.0.0+a == 1.0.0+b`); compare `str(v)` to tell builds apart.

One version per precedence (the rule, said here once): a skill's versions are told apart by
precedence alone, `==` here and `sort_key()` as stored (`version_key`). Two versions that differ only
in build metadata are one version, so registration refuses the second (409 `version_conflict`,
registry.agents.registration) and `resolve` never answers an exact request with another text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

MAX_VERSION_LENGTH = 128
MAX_RANGE_LENGTH = 256
# The sort key pads numbers to this many digits; larger numbers would break its ordering, so they
# are rejected (npm caps at 2**53 - 1, far below this).
MAX_NUMBER_DIGITS = 20

_NUMBER = r"0|[1-9][0-9]*"
_PRERELEASE_ID = r"0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*"
_BUILD_ID = r"[0-9A-Za-z-]+"
# Explicit ASCII classes, not \d: Python's \d also matches non-ASCII digits.
_VERSION = re.compile(
    rf"(?P<major>{_NUMBER})\.(?P<minor>{_NUMBER})\.(?P<patch>{_NUMBER})"
    rf"(?:-(?P<prerelease>(?:{_PRERELEASE_ID})(?:\.(?:{_PRERELEASE_ID}))*))?"
    rf"(?:\+(?P<build>{_BUILD_ID}(?:\.{_BUILD_ID})*))?"
)
_PARTIAL = re.compile(rf"(?P<major>{_NUMBER})(?:\.(?P<minor>{_NUMBER}))?")
_OPERATOR = re.compile(r"(\^|~|>=|<=|>|<|=)?(.*)", re.DOTALL)

# Sort key bytes. Core numbers are fixed width, then a marker: "-" (pre-release) sorts before "~"
# (release). Pre-release identifiers are joined by ",", which is below every identifier character
# ("-" is the lowest), so "alpha" sorts before "alpha-x" and "alpha.1". Each identifier starts with a
# type marker, "#" (numeric, zero-padded) below "@" (alphanumeric), so numeric < alphanumeric.
_KEY_PRERELEASE = "-"
_KEY_RELEASE = "~"
_KEY_SEPARATOR = ","
_KEY_NUMERIC = "#"
_KEY_ALPHANUMERIC = "@"


class InvalidVersion(ValueError):
    """Text that is not a strict semver 2.0 version."""


class InvalidRange(ValueError):
    """Text that is not a supported version range (or `latest`, or an exact version)."""


@dataclass(frozen=True, slots=True)
class Version:
    """A semver 2.0 version. Ordered by precedence; build metadata only shows in `str()`."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        # Validate direct construction too, so every Version has a valid text form and sort key.
        for number in (self.major, self.minor, self.patch):
            if type(number) is not int or number < 0 or len(str(number)) > MAX_NUMBER_DIGITS:
                raise InvalidVersion(f"version numbers must be integers of 0 to {MAX_NUMBER_DIGITS} digits")
        if not isinstance(self.prerelease, tuple) or not all(isinstance(i, str) for i in self.prerelease):
            raise InvalidVersion("prerelease must be a tuple of identifier strings")
        if not isinstance(self.build, str):
            raise InvalidVersion("build must be a string")
        text = str(self)
        if len(text) > MAX_VERSION_LENGTH:
            raise InvalidVersion(f"versions are at most {MAX_VERSION_LENGTH} characters")
        if _VERSION.fullmatch(text) is None:
            raise InvalidVersion(f"{text!r} is not a semantic version")
        for identifier in self.prerelease:
            if identifier.isdigit() and len(identifier) > MAX_NUMBER_DIGITS:
                raise InvalidVersion(f"numeric pre-release identifiers are at most {MAX_NUMBER_DIGITS} digits")

    @classmethod
    def parse(cls, text: str) -> Version:
        """Strict semver 2.0: no `v` prefix, no leading zeros, no surrounding whitespace."""
        if not isinstance(text, str):
            raise InvalidVersion("a version must be a string")
        if len(text) > MAX_VERSION_LENGTH:
            raise InvalidVersion(f"versions are at most {MAX_VERSION_LENGTH} characters")
        match = _VERSION.fullmatch(text)
        if match is None:
            raise InvalidVersion(
                f"{text!r} is not a semantic version: write MAJOR.MINOR.PATCH[-PRE][+BUILD], e.g. 3.0.0"
                " (no leading 'v', no leading zeros, no spaces)"
            )
        prerelease = match["prerelease"]
        return cls(
            int(match["major"]),
            int(match["minor"]),
            int(match["patch"]),
            tuple(prerelease.split(".")) if prerelease else (),
            match["build"] or "",
        )

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + self.build
        return text

    @property
    def is_prerelease(self) -> bool:
        return bool(self.prerelease)

    @property
    def core(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def _precedence(self) -> tuple:
        # A release sorts after all of its pre-releases; among identifiers numeric ones sort first
        # and compare numerically; a shorter identifier list sorts first (tuple order does that).
        if not self.prerelease:
            return (*self.core, 1, ())
        identifiers = tuple((0, int(i), "") if i.isdigit() else (1, 0, i) for i in self.prerelease)
        return (*self.core, 0, identifiers)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._precedence() < other._precedence()

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._precedence() <= other._precedence()

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._precedence() > other._precedence()

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._precedence() >= other._precedence()

    def sort_key(self) -> str:
        """ASCII text whose bytewise order is semver precedence (build metadata is not in it): also a
        version's identity among its skill's versions (one version per precedence, above)."""
        core = f"{self.major:020d}.{self.minor:020d}.{self.patch:020d}"
        if not self.prerelease:
            return core + _KEY_RELEASE
        identifiers = (
            _KEY_NUMERIC + f"{int(i):020d}" if i.isdigit() else _KEY_ALPHANUMERIC + i for i in self.prerelease
        )
        return core + _KEY_PRERELEASE + _KEY_SEPARATOR.join(identifiers)


Operator = Literal["<", "<=", ">", ">=", "="]


@dataclass(frozen=True, slots=True)
class Comparator:
    """One bound of a range, on a full version (partial versions are expanded when parsing)."""

    operator: Operator
    version: Version

    def matches(self, version: Version) -> bool:
        match self.operator:
            case "<":
                return version < self.version
            case "<=":
                return version <= self.version
            case ">":
                return version > self.version
            case ">=":
                return version >= self.version
            case _:
                return version == self.version

    def __str__(self) -> str:
        return f"{self.operator}{self.version}"


@dataclass(frozen=True, slots=True)
class VersionRange:
    """A set of comparators, all of which must hold (an intersection); no comparators means `*`.

    Pre-releases follow npm's rule: a pre-release version matches only if the range itself names a
    pre-release of the same MAJOR.MINOR.PATCH (`>=2.1.0-beta` admits `2.1.0-rc.1`, not `2.2.0-rc.1`).
    So `^2` never hands out a pre-release; asking for one takes an exact version or such a range.
    """

    text: str
    comparators: tuple[Comparator, ...]
    prerelease_cores: frozenset[tuple[int, int, int]] = frozenset()

    def matches(self, version: Version) -> bool:
        if version.is_prerelease and version.core not in self.prerelease_cores:
            return False
        return all(comparator.matches(version) for comparator in self.comparators)

    def __str__(self) -> str:
        return self.text


def parse_range(text: str) -> VersionRange:
    """Parse a range. Supported forms (npm semantics; partial versions are `M` or `M.m`):

    - exact `2.1.0` / `=2.1.0`; a bare partial is an X-range: `2` means `>=2.0.0 <3.0.0-0`;
    - caret `^2`, `^2.1`, `^2.1.3`, `^0.3` (`>=0.3.0 <0.4.0-0`), `^0.0.3` (`>=0.0.3 <0.0.4-0`);
    - tilde `~2` (`>=2.0.0 <3.0.0-0`), `~2.1`, `~2.1.3` (`>=2.1.3 <2.2.0-0`);
    - comparators `>`, `>=`, `<`, `<=`, `=` on full or partial versions (`>1.2` means `>=1.3.0`);
    - `*` (any release);
    - several of these separated by commas and/or whitespace, all of which must hold.

    Not supported (InvalidRange): `x` wildcards, hyphen ranges, `||`, a space after an operator.
    """
    if not isinstance(text, str):
        raise InvalidRange("a version range must be a string")
    if len(text) > MAX_RANGE_LENGTH:
        raise InvalidRange(f"version ranges are at most {MAX_RANGE_LENGTH} characters")
    if not text.strip():
        raise InvalidRange("empty version range")
    comparators: list[Comparator] = []
    prerelease_cores: set[tuple[int, int, int]] = set()
    for part in text.split(","):
        terms = part.split()
        if not terms:
            raise InvalidRange(f"empty comparator in {text!r}")
        for term in terms:
            comparators.extend(_parse_term(term, prerelease_cores))
    return VersionRange(text, tuple(comparators), frozenset(prerelease_cores))


def _parse_term(term: str, prerelease_cores: set[tuple[int, int, int]]) -> list[Comparator]:
    if term == "*":
        return []
    match = _OPERATOR.fullmatch(term)
    assert match is not None  # the pattern accepts any text
    operator, rest = match[1] or "", match[2]
    try:
        partial = _PARTIAL.fullmatch(rest)
        if partial is not None:
            major = _partial_number(partial["major"])
            minor = _partial_number(partial["minor"]) if partial["minor"] is not None else None
            return _expand_partial(operator, major, minor)
        try:
            version = Version.parse(rest)
        except InvalidVersion:
            raise InvalidRange(f"{term!r} is not a version, partial version or range") from None
        if version.is_prerelease:
            prerelease_cores.add(version.core)
        return _expand_full(operator, version)
    except InvalidVersion as exc:  # a bound computed from a huge number overflowed
        raise InvalidRange(f"{term!r}: {exc}") from None


def _partial_number(digits: str) -> int:
    if len(digits) > MAX_NUMBER_DIGITS:
        raise InvalidRange(f"version numbers are at most {MAX_NUMBER_DIGITS} digits")
    return int(digits)


def _below(major: int, minor: int, patch: int) -> Comparator:
    # "< M.m.p-0" excludes M.m.p's pre-releases too ("0" is the lowest pre-release identifier).
    return Comparator("<", Version(major, minor, patch, ("0",)))


def _expand_partial(operator: str, major: int, minor: int | None) -> list[Comparator]:
    low = Version(major, minor or 0, 0)
    # The first version above the partial: the next major for "M", the next minor for "M.m".
    above = (major + 1, 0, 0) if minor is None else (major, minor + 1, 0)
    match operator:
        case "" | "=" | "~":
            return [Comparator(">=", low), _below(*above)]
        case "^":
            if major == 0 and minor is not None:
                return [Comparator(">=", low), _below(0, minor + 1, 0)]
            return [Comparator(">=", low), _below(major + 1, 0, 0)]
        case ">=":
            return [Comparator(">=", low)]
        case ">":
            return [Comparator(">=", Version(*above))]
        case "<":
            return [_below(major, minor or 0, 0)]
        case _:  # "<="
            return [_below(*above)]


def _expand_full(operator: str, version: Version) -> list[Comparator]:
    match operator:
        case "" | "=":
            return [Comparator("=", version)]
        case "^":
            if version.major > 0:
                upper = _below(version.major + 1, 0, 0)
            elif version.minor > 0:
                upper = _below(0, version.minor + 1, 0)
            else:
                upper = _below(0, 0, version.patch + 1)
            return [Comparator(">=", version), upper]
        case "~":
            return [Comparator(">=", version), _below(version.major, version.minor + 1, 0)]
        case _:
            return [Comparator(operator, version)]  # type: ignore[arg-type]


def resolve(spec: str, versions: Iterable[Version]) -> Version | None:
    """The version `spec` asks for among `versions`, or None when nothing fits.

    `spec` is `latest` (newest release; pre-releases are never semver's "latest": a skill's latest
    version is auth.policy.LATEST_ORDER's, registry.release.service.choose_version), an exact version, or
    a range (newest match). An exact version answers the version of that text; without build metadata
    it also answers the one version of its precedence (`1.0.0` finds a lone `1.0.0+b7`), never one of
    several (builds stored before one version per precedence was enforced are ambiguous: None).
    Raises InvalidRange when `spec` is none of these. The answer is one of the given objects itself
    (not a copy), so callers can map it back to their records by identity.
    """
    candidates = list(versions)
    if spec == "latest":
        return max((v for v in candidates if not v.is_prerelease), default=None)
    try:
        exact = Version.parse(spec)
    except InvalidVersion:
        exact = None
    if exact is not None:
        same = [v for v in candidates if v == exact]
        written = next((v for v in same if str(v) == spec), None)
        if written is not None or exact.build:
            return written
        return same[0] if len(same) == 1 else None
    version_range = parse_range(spec)
    return max((v for v in candidates if version_range.matches(v)), default=None)
