"""ARD: the Agentic Resource Discovery registry API and manifest over discovery's visibility and ranking."""
