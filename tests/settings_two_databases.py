"""The tests' settings with queues on two databases, for child processes of those tests.

``SECOND_DATABASE_URL`` names the second cluster's database (``tests.two_clusters`` starts it
and passes the URL to the processes it starts); its queues are ``TWO_DATABASES``'s.
``SPARE_DATABASE_URL``, when set, adds the alias 'spare', which holds no queues (the migration
test's: rivet's tables must not go there).
"""

import os

from effect_project.dbconfig import database_from_url
from tests.settings import *  # noqa: F403 - these settings, plus the second alias
from tests.settings import DATABASES, RIVET

SECOND_ALIAS = "queues_b"
#: The queues that live on the second database (the rest on 'default').
TWO_DATABASES = {"mail": SECOND_ALIAS, "mail_low": SECOND_ALIAS}

if os.environ.get("SECOND_DATABASE_URL"):
    DATABASES = {
        **DATABASES,
        SECOND_ALIAS: database_from_url(os.environ["SECOND_DATABASE_URL"], "SECOND_DATABASE_URL"),
    }
    RIVET = {**RIVET, "QUEUE_DATABASES": TWO_DATABASES}
    DATABASE_ROUTERS = ["rivet.routers.QueueRouter"]
if os.environ.get("SPARE_DATABASE_URL"):
    DATABASES = {
        **DATABASES,
        "spare": database_from_url(os.environ["SPARE_DATABASE_URL"], "SPARE_DATABASE_URL"),
    }
