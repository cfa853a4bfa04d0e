"""The seam between vidax's layers and its weight formats and CPU kernels.

Everything that depends on how a weight is stored (dense, int8 / fp8, GGUF blocks, a layer of a
stack read in place) or on which CPU matmul runs (XLA's dot or the custom call of
:mod:`vidax.cpu`) is reached through this package; no module outside it imports :mod:`vidax.cpu`
(``tests/test_contracts.py`` checks it). GPU and TPU need none of it: there every function here
is XLA's own operation and every stack view leaves the arrays as they are.

* :mod:`~vidax.nn.kernels.formats`: one type per weight format of a Linear kernel, behind one
  call (:func:`weight_of`, then ``weight.matmul``), with where each is stored.
* :mod:`~vidax.nn.kernels.cpu`: the CPU backend's matmuls (:func:`dot_f32`, attention's
  products), what they run through (:func:`~vidax.nn.kernels.cpu.describe`, per module :func:`describe_matmul`) and their switch
  (:func:`check_matmul_setting`).
* :mod:`~vidax.nn.kernels.stacks`: stacked weights on the CPU: uint16 views
  (:func:`as_stack_bits`, :func:`from_stack_bits`, :func:`stack_bits_putter`), the scan's view of
  each stacked leaf (:class:`ScanLeaves`) and the kernel layout of stacks read in place
  (:func:`lay_out_kernel_stacks`, :func:`with_layout_of`).
"""

from vidax.nn.kernels.cpu import (
    attention_scores,
    attention_values,
    check_matmul_setting,
    dot_f32,
    fused_attention_products,
    xla_cpu_upcasts,
)
from vidax.nn.kernels.formats import (
    Dense,
    GGUFBlocks,
    InPlace,
    KernelOwner,
    Quantized,
    Weight,
    describe_matmul,
    format_name,
    kept_formats,
    weight_of,
)
from vidax.nn.kernels.stacks import (
    ScanLeaves,
    StackBits,
    StackedKernel,
    as_stack_bits,
    from_stack_bits,
    from_torch_layout,
    has_kernel_layout,
    keeps_kernel_layout,
    lay_out_kernel_stacks,
    reads_stacks_in_place,
    stack_bits_putter,
    stack_bits_state,
    with_layout_of,
)

__all__ = [
    "attention_scores",
    "attention_values",
    "check_matmul_setting",
    "dot_f32",
    "fused_attention_products",
    "xla_cpu_upcasts",
    "Dense",
    "GGUFBlocks",
    "InPlace",
    "KernelOwner",
    "Quantized",
    "Weight",
    "describe_matmul",
    "format_name",
    "kept_formats",
    "weight_of",
    "ScanLeaves",
    "StackBits",
    "StackedKernel",
    "as_stack_bits",
    "from_stack_bits",
    "from_torch_layout",
    "has_kernel_layout",
    "keeps_kernel_layout",
    "lay_out_kernel_stacks",
    "reads_stacks_in_place",
    "stack_bits_putter",
    "stack_bits_state",
    "with_layout_of",
]
