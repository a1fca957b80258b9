"""What only the notebooks need, apart from the library: no module of `course_lib` outside this package
imports it (tests/test_layering.py checks it).

    setup        course_setup, pick, reference_results, seed_everything: a notebook's first cells
    notebooks    run_notebook, strip_widget_state (python -m course_lib.course.notebooks [--learning] NB...)
    exercises/   nb00 ... nb11: each notebook's check_* functions (the rules: grading)
    grading      how every check answers: a stub, a wrong answer, a right one
    solutions    the reference solution of every exercise
    tabular      the tabular companion of notebooks 06-08: table policies trained through credit.advantages
"""
