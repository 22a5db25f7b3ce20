"""The REST/JSON door on aiohttp: Google's HTTP bindings, request parsing, system query
parameters, Google's JSON errors, and the Pulsar-shaped skip route."""
