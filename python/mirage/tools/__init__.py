"""Command-line tools: mirage-opt."""
