"""Configuration: parameter classes, enums, metric and monitor specs."""
