"""The bridge: tables for job_submit.lua and the capacity snapshot it reads."""
