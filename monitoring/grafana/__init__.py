"""Grafana dashboard definition, generated JSON and provisioning files."""
