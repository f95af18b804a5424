"""Discovery: public capability views, filters, pages, ETags, and the change feed."""
