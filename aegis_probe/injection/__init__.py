"""Fault injection with labels by construction (MAST failure modes, two strategies).

``probe.inject(plan)`` applies an :class:`InjectionPlan` to an instrumented app's runs through
the core interceptor seam; :func:`run_campaign` turns successful baseline runs into verified,
labelled failures. See docs/injection.md.
"""

from .interceptor import Injector, run_with_plan
from .judges import exact, judge_for, numeric, unit_tests
from .manipulator import LLMManipulator
from .operators import OPERATORS, Context, DeterministicManipulator
from .plan import MODES, STRATEGIES, AppliedFault, InjectionPlan, Target

__all__ = [
    "MODES", "OPERATORS", "STRATEGIES", "AppliedFault", "Context", "DeterministicManipulator", "InjectionPlan",
    "Injector", "LLMManipulator", "Target", "exact", "judge_for", "numeric", "run_with_plan", "unit_tests",
]
