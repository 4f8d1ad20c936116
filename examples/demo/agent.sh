#!/bin/sh
# A stand-in for an AI coding agent: it does its declared work, then strays.
set -u
echo "agent: editing src/app.py (declared: MUTATES src/**)"
echo "print('hello from the agent')" >> src/app.py
echo "agent: writing build/report.txt (declared: PROVIDES build/**)"
mkdir -p build && echo "built" > build/report.txt
echo "agent: tightening config/settings.yaml permissions (only CONSUMES declared)"
chmod 600 config/settings.yaml
echo "agent: appending to config/settings.yaml (only CONSUMES declared)"
echo "debug: true" >> config/settings.yaml || echo "agent: the write was refused"
echo "agent: done"
