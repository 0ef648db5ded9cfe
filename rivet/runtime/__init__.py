"""Parts of the worker runtime that rivet.worker composes: settling attempts, worker options."""
