"""The operation boundary: each operation declared once, and the one path that audits a refusal."""
