"""Tier 3: the official google-cloud-pubsub client against ``eoclient serve``."""
