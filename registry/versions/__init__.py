"""Versions: semver, ranges, the lifecycle, and compatibility between versions."""
