import os

c = get_config()
c.CourseDirectory.course_id = "day13"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
# Where release_assignment puts the notebook and submit puts it back: a folder every student can
# reach (nbgrader's default is /srv/nbgrader/exchange).
c.Exchange.root = os.path.join(c.CourseDirectory.root, "exchange")
# The kit grades the hidden tests in nbgrader's process instead of executing the notebook in a kernel.
from grader.release.nbgrader_autograde import use_the_kit

use_the_kit(c)
