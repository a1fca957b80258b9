"""Bridges from course_lib to other training libraries (TRL's GRPOTrainer: `course_lib.integrations.trl`)."""
