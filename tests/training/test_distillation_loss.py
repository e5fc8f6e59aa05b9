"""The drafter's distillation loss (specli/training/layerskip.py `distillation_loss`): KL(teacher || student),
the divergence whose minimiser puts the student's mass where the target's is (forward KL, as the
distilled drafters are trained), computed here by hand on distributions where the two directions differ."""

from __future__ import annotations

import pytest
import torch

from specli.training.layerskip import distillation_loss

TEACHER = torch.tensor([[3.0, 0.0, -2.0, 0.5], [0.2, 0.1, 2.5, -1.0], [-1.0, 1.0, 0.0, 4.0]])
STUDENT = torch.tensor([[0.0, 2.0, 0.0, -1.0], [1.5, -0.5, 0.0, 0.0], [0.3, 0.0, 2.0, 1.0]])


def _kl(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Mean over rows of KL(softmax(a) || softmax(b))."""
    log_a, log_b = a.log_softmax(-1), b.log_softmax(-1)
    return (log_a.exp() * (log_a - log_b)).sum(-1).mean()


def test_the_distillation_loss_is_the_teachers_kl_to_the_student():
    """Bug caught: the arguments of kl_div swapped, i.e. KL(student || teacher) (mode-seeking: the
    drafter learns to cover one of the target's modes and drops the rest of its mass)."""
    forward, reverse = _kl(TEACHER, STUDENT), _kl(STUDENT, TEACHER)
    assert abs(float(forward - reverse)) > 0.1  # the example tells the two directions apart
    assert float(distillation_loss(STUDENT, TEACHER)) == pytest.approx(float(forward), rel=1e-5)
    assert float(distillation_loss(TEACHER, TEACHER)) == pytest.approx(0.0, abs=1e-6)


def test_its_gradient_moves_the_student_toward_the_teacher():
    """Bug caught: as above; the gradient of the forward KL in the student's logits is q - p."""
    student = STUDENT.clone().requires_grad_(True)
    distillation_loss(student, TEACHER).backward()
    expected = (STUDENT.softmax(-1) - TEACHER.softmax(-1)) / STUDENT.shape[0]
    torch.testing.assert_close(student.grad, expected, rtol=1e-4, atol=1e-6)
