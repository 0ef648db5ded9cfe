# One image for the effect service and the chaos harness (docker-compose.yml picks the command).
FROM python:3.11-slim

# Configuration comes from the container's environment (docker-compose.yml), never from .env.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RIVET_READ_DOTENV=0

WORKDIR /app
COPY . .
RUN pip install 'pip>=25.1' \
    && pip install '.[binary,pool,api,metrics]' --group effect \
    && useradd --system --home-dir /app --shell /usr/sbin/nologin rivet \
    && chown -R rivet /app
USER rivet

EXPOSE 8081
CMD ["python", "manage.py", "rivet_worker"]
