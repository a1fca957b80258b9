"""The notebooks' exercise checks, one module per notebook: `nb00` ... `nb11` hold the `check_*` functions
of notebooks 00 to 11 and their graders
(`from course_lib.course.exercises.nb06 import check_discounted_returns`).

Each check grades one exercise and returns what the cells below should use; the rules are in
`course_lib.course.grading`, the reference solutions in `course_lib.course.solutions`.
"""
