-- Run once by the rivet-db container on first start: the effect service's database beside the
-- queue's, so the committed .env (both on 127.0.0.1:5432) works with `docker compose up -d
-- rivet-db` as with a local server. The compose chaos run uses its own effect-db server.
CREATE DATABASE rivet_effect;
