"""The HTTP shell around every request: authentication, request guard, rate limit, observability."""
