"""Renderers consume round events; they never touch models."""
