"""`python -m course_lib.tasks`: generate or check every environment's task data (see `course_lib.tasks`)."""

import sys

from course_lib.tasks import main

sys.exit(main())
