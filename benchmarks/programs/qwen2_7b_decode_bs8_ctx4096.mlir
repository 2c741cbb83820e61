// transformers qwen2 decoder layer at a decode step, fp16 (examples/transformers_layers.py),
// imported by mirage.torch.import_module(..., allow_fp32_upcast_elision=True)
// import: 1 kn segment(s), 0 op(s) left to PyTorch
//   not exact: 1 upcast(s) float16->float32 and 1 downcast(s) elided around add.Tensor, mean.dim, mul.Tensor, pow.Tensor_Scalar, rsqrt (computed at float16; allow_fp32_upcast_elision=True)
//   not exact: 3 upcast(s) float16->float32 and 1 downcast(s) elided around add.Tensor, mm, mul.Tensor, mul.Tensor (computed at float16; allow_fp32_upcast_elision=True)
//   not exact: 3 upcast(s) float16->float32 and 1 downcast(s) elided around add.Tensor, mm, mul.Tensor, mul.Tensor (computed at float16; allow_fp32_upcast_elision=True)
//   not exact: 3 upcast(s) float16->float32 and 1 downcast(s) elided around add.Tensor, mm, mul.Tensor, mul.Tensor (computed at float16; allow_fp32_upcast_elision=True)
//   not exact: 1 upcast(s) float16->float32 and 1 downcast(s) elided around _softmax (computed at float16; allow_fp32_upcast_elision=True)
//   not exact: 1 upcast(s) float16->float32 and 1 downcast(s) elided around add.Tensor, mean.dim, mul.Tensor, pow.Tensor_Scalar, rsqrt (computed at float16; allow_fp32_upcast_elision=True)
//   not exact: 1 upcast(s) float16->float32 and 1 downcast(s) elided around mul.Tensor, sigmoid (computed at float16; allow_fp32_upcast_elision=True)
//   removed: 5 no-op _assert_tensor_metadata check(s) removed (checked by the export)
//   removed: 2 empty operand(s) of cat removed
//   kn segment @main (fused_0): 108 ATen ops -> 65 kn ops {square: 2, reduction: 3, constant: 3, mul: 12, add: 9, rsqrt: 2, reshape: 15, matmul: 11, concat: 2, transpose: 1, reduce_max: 1, sub: 1, exp: 1, div: 1, silu: 1}
//     inputs: input:hidden, parameter:layer.input_layernorm.weight.reshape(1,1,3584), parameter:layer.self_attn.q_proj.weight.transpose(1,0), parameter:layer.self_attn.q_proj.bias.reshape(1,3584), parameter:layer.self_attn.k_proj.weight.transpose(1,0), parameter:layer.self_attn.k_proj.bias.reshape(1,512), parameter:layer.self_attn.v_proj.weight.transpose(1,0), parameter:layer.self_attn.v_proj.bias.reshape(1,512), input:cos, input:sin, input:past_k, input:past_v, parameter:layer.self_attn.o_proj.weight.transpose(1,0), parameter:layer.post_attention_layernorm.weight.reshape(1,1,3584), parameter:layer.mlp.gate_proj.weight.transpose(1,0), parameter:layer.mlp.up_proj.weight.transpose(1,0), parameter:layer.mlp.down_proj.weight.transpose(1,0), constant:const17
//     rewrites: 8 reshape(s) moved past element-wise ops and cancelled, a * reciprocal(b) -> a / b, cast(half matmul accumulated at f32) -> half matmul, concatenated slices of one tensor -> one matmul by a signed selection matrix, matmul by repeat_kv's copies -> grouped matmul (each KV head read once), reshape(matmul(reshape a, reshape b)) -> matmul(a, b), slice -> matmul by a 0/1 selection matrix, x * sigmoid(x) -> silu(x)
module {
  func.func @main(%arg0: tensor<8x1x3584xf16>, %arg1: tensor<1x1x3584xf16>, %arg2: tensor<3584x3584xf16>, %arg3: tensor<1x3584xf16>, %arg4: tensor<3584x512xf16>, %arg5: tensor<1x512xf16>, %arg6: tensor<3584x512xf16>, %arg7: tensor<1x512xf16>, %arg8: tensor<8x1x128xf16>, %arg9: tensor<8x1x128xf16>, %arg10: tensor<8x4x4096x128xf16>, %arg11: tensor<8x4x4096x128xf16>, %arg12: tensor<3584x3584xf16>, %arg13: tensor<1x1x3584xf16>, %arg14: tensor<3584x18944xf16>, %arg15: tensor<3584x18944xf16>, %arg16: tensor<18944x3584xf16>, %arg17: tensor<128x128xf16>) -> (tensor<8x4x4097x128xf16>, tensor<8x4x4097x128xf16>, tensor<8x1x3584xf16>) {
    %0 = kn.square %arg0 : tensor<8x1x3584xf16> -> tensor<8x1x3584xf16>
    %1 = kn.reduction %0 {dim = 2 : i64} : tensor<8x1x3584xf16> -> tensor<8x1x1xf16>
    %2 = kn.constant 0.0002789497375488281 : tensor<1x1x1xf16>
    %3 = kn.mul %1, %2 : (tensor<8x1x1xf16>, tensor<1x1x1xf16>) -> tensor<8x1x1xf16>
    %4 = kn.constant 1.0132789611816406e-06 : tensor<1x1x1xf16>
    %5 = kn.add %3, %4 : (tensor<8x1x1xf16>, tensor<1x1x1xf16>) -> tensor<8x1x1xf16>
    %6 = kn.rsqrt %5 : tensor<8x1x1xf16> -> tensor<8x1x1xf16>
    %7 = kn.mul %arg0, %6 : (tensor<8x1x3584xf16>, tensor<8x1x1xf16>) -> tensor<8x1x3584xf16>
    %8 = kn.mul %arg1, %7 : (tensor<1x1x3584xf16>, tensor<8x1x3584xf16>) -> tensor<8x1x3584xf16>
    %9 = kn.reshape %8 : tensor<8x1x3584xf16> -> tensor<8x3584xf16>
    %10 = kn.matmul %9, %arg2 : (tensor<8x3584xf16>, tensor<3584x3584xf16>) -> tensor<8x3584xf16>
    %11 = kn.add %10, %arg3 : (tensor<8x3584xf16>, tensor<1x3584xf16>) -> tensor<8x3584xf16>
    %12 = kn.matmul %9, %arg4 : (tensor<8x3584xf16>, tensor<3584x512xf16>) -> tensor<8x512xf16>
    %13 = kn.add %12, %arg5 : (tensor<8x512xf16>, tensor<1x512xf16>) -> tensor<8x512xf16>
    %14 = kn.matmul %9, %arg6 : (tensor<8x3584xf16>, tensor<3584x512xf16>) -> tensor<8x512xf16>
    %15 = kn.add %14, %arg7 : (tensor<8x512xf16>, tensor<1x512xf16>) -> tensor<8x512xf16>
    %16 = kn.reshape %11 : tensor<8x3584xf16> -> tensor<8x28x1x128xf16>
    %17 = kn.reshape %arg8 : tensor<8x1x128xf16> -> tensor<8x1x1x128xf16>
    %18 = kn.mul %16, %17 : (tensor<8x28x1x128xf16>, tensor<8x1x1x128xf16>) -> tensor<8x28x1x128xf16>
    %19 = kn.reshape %11 : tensor<8x3584xf16> -> tensor<224x128xf16>
    %20 = kn.matmul %19, %arg17 : (tensor<224x128xf16>, tensor<128x128xf16>) -> tensor<224x128xf16>
    %21 = kn.reshape %20 : tensor<224x128xf16> -> tensor<8x28x1x128xf16>
    %22 = kn.reshape %arg9 : tensor<8x1x128xf16> -> tensor<8x1x1x128xf16>
    %23 = kn.mul %21, %22 : (tensor<8x28x1x128xf16>, tensor<8x1x1x128xf16>) -> tensor<8x28x1x128xf16>
    %24 = kn.add %18, %23 : (tensor<8x28x1x128xf16>, tensor<8x28x1x128xf16>) -> tensor<8x28x1x128xf16>
    %25 = kn.reshape %13 : tensor<8x512xf16> -> tensor<8x4x1x128xf16>
    %26 = kn.mul %25, %17 : (tensor<8x4x1x128xf16>, tensor<8x1x1x128xf16>) -> tensor<8x4x1x128xf16>
    %27 = kn.reshape %13 : tensor<8x512xf16> -> tensor<32x128xf16>
    %28 = kn.matmul %27, %arg17 : (tensor<32x128xf16>, tensor<128x128xf16>) -> tensor<32x128xf16>
    %29 = kn.reshape %28 : tensor<32x128xf16> -> tensor<8x4x1x128xf16>
    %30 = kn.mul %29, %22 : (tensor<8x4x1x128xf16>, tensor<8x1x1x128xf16>) -> tensor<8x4x1x128xf16>
    %31 = kn.add %26, %30 : (tensor<8x4x1x128xf16>, tensor<8x4x1x128xf16>) -> tensor<8x4x1x128xf16>
    %32 = kn.concat %arg10, %31 {dim = 2 : i64} : (tensor<8x4x4096x128xf16>, tensor<8x4x1x128xf16>) -> tensor<8x4x4097x128xf16>
    %33 = kn.reshape %15 : tensor<8x512xf16> -> tensor<8x4x1x128xf16>
    %34 = kn.concat %arg11, %33 {dim = 2 : i64} : (tensor<8x4x4096x128xf16>, tensor<8x4x1x128xf16>) -> tensor<8x4x4097x128xf16>
    %35 = kn.transpose %32 {permutation = array<i64: 0, 1, 3, 2>} : tensor<8x4x4097x128xf16> -> tensor<8x4x128x4097xf16>
    %36 = kn.reshape %24 : tensor<8x28x1x128xf16> -> tensor<8x4x7x128xf16>
    %37 = kn.matmul %36, %35 : (tensor<8x4x7x128xf16>, tensor<8x4x128x4097xf16>) -> tensor<8x4x7x4097xf16>
    %38 = kn.constant 0.08837890625 : tensor<1x1x1x1xf16>
    %39 = kn.mul %37, %38 : (tensor<8x4x7x4097xf16>, tensor<1x1x1x1xf16>) -> tensor<8x4x7x4097xf16>
    %40 = kn.reduce_max %39 {dim = 3 : i64} : tensor<8x4x7x4097xf16> -> tensor<8x4x7x1xf16>
    %41 = kn.sub %39, %40 : (tensor<8x4x7x4097xf16>, tensor<8x4x7x1xf16>) -> tensor<8x4x7x4097xf16>
    %42 = kn.exp %41 : tensor<8x4x7x4097xf16> -> tensor<8x4x7x4097xf16>
    %43 = kn.reduction %42 {dim = 3 : i64} : tensor<8x4x7x4097xf16> -> tensor<8x4x7x1xf16>
    %44 = kn.div %42, %43 : (tensor<8x4x7x4097xf16>, tensor<8x4x7x1xf16>) -> tensor<8x4x7x4097xf16>
    %45 = kn.matmul %44, %34 : (tensor<8x4x7x4097xf16>, tensor<8x4x4097x128xf16>) -> tensor<8x4x7x128xf16>
    %46 = kn.reshape %45 : tensor<8x4x7x128xf16> -> tensor<8x3584xf16>
    %47 = kn.matmul %46, %arg12 : (tensor<8x3584xf16>, tensor<3584x3584xf16>) -> tensor<8x3584xf16>
    %48 = kn.reshape %47 : tensor<8x3584xf16> -> tensor<8x1x3584xf16>
    %49 = kn.add %arg0, %48 : (tensor<8x1x3584xf16>, tensor<8x1x3584xf16>) -> tensor<8x1x3584xf16>
    %50 = kn.square %49 : tensor<8x1x3584xf16> -> tensor<8x1x3584xf16>
    %51 = kn.reduction %50 {dim = 2 : i64} : tensor<8x1x3584xf16> -> tensor<8x1x1xf16>
    %52 = kn.mul %51, %2 : (tensor<8x1x1xf16>, tensor<1x1x1xf16>) -> tensor<8x1x1xf16>
    %53 = kn.add %52, %4 : (tensor<8x1x1xf16>, tensor<1x1x1xf16>) -> tensor<8x1x1xf16>
    %54 = kn.rsqrt %53 : tensor<8x1x1xf16> -> tensor<8x1x1xf16>
    %55 = kn.mul %49, %54 : (tensor<8x1x3584xf16>, tensor<8x1x1xf16>) -> tensor<8x1x3584xf16>
    %56 = kn.mul %arg13, %55 : (tensor<1x1x3584xf16>, tensor<8x1x3584xf16>) -> tensor<8x1x3584xf16>
    %57 = kn.reshape %56 : tensor<8x1x3584xf16> -> tensor<8x3584xf16>
    %58 = kn.matmul %57, %arg14 : (tensor<8x3584xf16>, tensor<3584x18944xf16>) -> tensor<8x18944xf16>
    %59 = kn.silu %58 : tensor<8x18944xf16> -> tensor<8x18944xf16>
    %60 = kn.matmul %57, %arg15 : (tensor<8x3584xf16>, tensor<3584x18944xf16>) -> tensor<8x18944xf16>
    %61 = kn.mul %59, %60 : (tensor<8x18944xf16>, tensor<8x18944xf16>) -> tensor<8x18944xf16>
    %62 = kn.matmul %61, %arg16 : (tensor<8x18944xf16>, tensor<18944x3584xf16>) -> tensor<8x3584xf16>
    %63 = kn.reshape %62 : tensor<8x3584xf16> -> tensor<8x1x3584xf16>
    %64 = kn.add %49, %63 : (tensor<8x1x3584xf16>, tensor<8x1x3584xf16>) -> tensor<8x1x3584xf16>
    return %32, %34, %64 : tensor<8x4x4097x128xf16>, tensor<8x4x4097x128xf16>, tensor<8x1x3584xf16>
  }
}
