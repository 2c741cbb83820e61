// transformers llama decoder layer at a decode step, fp16 (examples/transformers_layers.py),
// imported by mirage.torch.import_module(..., allow_fp32_upcast_elision=True)
// import: 1 kn segment(s), 0 op(s) left to PyTorch
//   not exact: 1 upcast(s) float16->float32 and 1 downcast(s) elided around add.Tensor, mean.dim, mul.Tensor, pow.Tensor_Scalar, rsqrt (computed at float16; allow_fp32_upcast_elision=True)
//   not exact: 1 upcast(s) float16->float32 and 1 downcast(s) elided around _softmax (computed at float16; allow_fp32_upcast_elision=True)
//   not exact: 1 upcast(s) float16->float32 and 1 downcast(s) elided around add.Tensor, mean.dim, mul.Tensor, pow.Tensor_Scalar, rsqrt (computed at float16; allow_fp32_upcast_elision=True)
//   not exact: 1 upcast(s) float16->float32 and 1 downcast(s) elided around mul.Tensor, sigmoid (computed at float16; allow_fp32_upcast_elision=True)
//   removed: 5 no-op _assert_tensor_metadata check(s) removed (checked by the export)
//   removed: 2 empty operand(s) of cat removed
//   kn segment @main (fused_0): 99 ATen ops -> 62 kn ops {square: 2, reduction: 3, constant: 3, mul: 12, add: 6, rsqrt: 2, reshape: 15, matmul: 11, concat: 2, transpose: 1, reduce_max: 1, sub: 1, exp: 1, div: 1, silu: 1}
//     inputs: input:hidden, parameter:layer.input_layernorm.weight.reshape(1,1,4096), parameter:layer.self_attn.q_proj.weight.transpose(1,0), parameter:layer.self_attn.k_proj.weight.transpose(1,0), parameter:layer.self_attn.v_proj.weight.transpose(1,0), input:cos, input:sin, input:past_k, input:past_v, parameter:layer.self_attn.o_proj.weight.transpose(1,0), parameter:layer.post_attention_layernorm.weight.reshape(1,1,4096), parameter:layer.mlp.gate_proj.weight.transpose(1,0), parameter:layer.mlp.up_proj.weight.transpose(1,0), parameter:layer.mlp.down_proj.weight.transpose(1,0), constant:const14
//     rewrites: 8 reshape(s) moved past element-wise ops and cancelled, a * reciprocal(b) -> a / b, cast(half matmul accumulated at f32) -> half matmul, concatenated slices of one tensor -> one matmul by a signed selection matrix, matmul by repeat_kv's copies -> grouped matmul (each KV head read once), reshape(matmul(reshape a, reshape b)) -> matmul(a, b), slice -> matmul by a 0/1 selection matrix, x * sigmoid(x) -> silu(x)
module {
  func.func @main(%arg0: tensor<1x1x4096xf16>, %arg1: tensor<1x1x4096xf16>, %arg2: tensor<4096x4096xf16>, %arg3: tensor<4096x1024xf16>, %arg4: tensor<4096x1024xf16>, %arg5: tensor<1x1x128xf16>, %arg6: tensor<1x1x128xf16>, %arg7: tensor<1x8x4096x128xf16>, %arg8: tensor<1x8x4096x128xf16>, %arg9: tensor<4096x4096xf16>, %arg10: tensor<1x1x4096xf16>, %arg11: tensor<4096x14336xf16>, %arg12: tensor<4096x14336xf16>, %arg13: tensor<14336x4096xf16>, %arg14: tensor<128x128xf16>) -> (tensor<1x8x4097x128xf16>, tensor<1x8x4097x128xf16>, tensor<1x1x4096xf16>) {
    %0 = kn.square %arg0 : tensor<1x1x4096xf16> -> tensor<1x1x4096xf16>
    %1 = kn.reduction %0 {dim = 2 : i64} : tensor<1x1x4096xf16> -> tensor<1x1x1xf16>
    %2 = kn.constant 0.000244140625 : tensor<1x1x1xf16>
    %3 = kn.mul %1, %2 : (tensor<1x1x1xf16>, tensor<1x1x1xf16>) -> tensor<1x1x1xf16>
    %4 = kn.constant 1.0132789611816406e-06 : tensor<1x1x1xf16>
    %5 = kn.add %3, %4 : (tensor<1x1x1xf16>, tensor<1x1x1xf16>) -> tensor<1x1x1xf16>
    %6 = kn.rsqrt %5 : tensor<1x1x1xf16> -> tensor<1x1x1xf16>
    %7 = kn.mul %arg0, %6 : (tensor<1x1x4096xf16>, tensor<1x1x1xf16>) -> tensor<1x1x4096xf16>
    %8 = kn.mul %arg1, %7 : (tensor<1x1x4096xf16>, tensor<1x1x4096xf16>) -> tensor<1x1x4096xf16>
    %9 = kn.reshape %8 : tensor<1x1x4096xf16> -> tensor<1x4096xf16>
    %10 = kn.matmul %9, %arg2 : (tensor<1x4096xf16>, tensor<4096x4096xf16>) -> tensor<1x4096xf16>
    %11 = kn.matmul %9, %arg3 : (tensor<1x4096xf16>, tensor<4096x1024xf16>) -> tensor<1x1024xf16>
    %12 = kn.matmul %9, %arg4 : (tensor<1x4096xf16>, tensor<4096x1024xf16>) -> tensor<1x1024xf16>
    %13 = kn.reshape %10 : tensor<1x4096xf16> -> tensor<1x32x1x128xf16>
    %14 = kn.reshape %arg5 : tensor<1x1x128xf16> -> tensor<1x1x1x128xf16>
    %15 = kn.mul %13, %14 : (tensor<1x32x1x128xf16>, tensor<1x1x1x128xf16>) -> tensor<1x32x1x128xf16>
    %16 = kn.reshape %10 : tensor<1x4096xf16> -> tensor<32x128xf16>
    %17 = kn.matmul %16, %arg14 : (tensor<32x128xf16>, tensor<128x128xf16>) -> tensor<32x128xf16>
    %18 = kn.reshape %17 : tensor<32x128xf16> -> tensor<1x32x1x128xf16>
    %19 = kn.reshape %arg6 : tensor<1x1x128xf16> -> tensor<1x1x1x128xf16>
    %20 = kn.mul %18, %19 : (tensor<1x32x1x128xf16>, tensor<1x1x1x128xf16>) -> tensor<1x32x1x128xf16>
    %21 = kn.add %15, %20 : (tensor<1x32x1x128xf16>, tensor<1x32x1x128xf16>) -> tensor<1x32x1x128xf16>
    %22 = kn.reshape %11 : tensor<1x1024xf16> -> tensor<1x8x1x128xf16>
    %23 = kn.mul %22, %14 : (tensor<1x8x1x128xf16>, tensor<1x1x1x128xf16>) -> tensor<1x8x1x128xf16>
    %24 = kn.reshape %11 : tensor<1x1024xf16> -> tensor<8x128xf16>
    %25 = kn.matmul %24, %arg14 : (tensor<8x128xf16>, tensor<128x128xf16>) -> tensor<8x128xf16>
    %26 = kn.reshape %25 : tensor<8x128xf16> -> tensor<1x8x1x128xf16>
    %27 = kn.mul %26, %19 : (tensor<1x8x1x128xf16>, tensor<1x1x1x128xf16>) -> tensor<1x8x1x128xf16>
    %28 = kn.add %23, %27 : (tensor<1x8x1x128xf16>, tensor<1x8x1x128xf16>) -> tensor<1x8x1x128xf16>
    %29 = kn.concat %arg7, %28 {dim = 2 : i64} : (tensor<1x8x4096x128xf16>, tensor<1x8x1x128xf16>) -> tensor<1x8x4097x128xf16>
    %30 = kn.reshape %12 : tensor<1x1024xf16> -> tensor<1x8x1x128xf16>
    %31 = kn.concat %arg8, %30 {dim = 2 : i64} : (tensor<1x8x4096x128xf16>, tensor<1x8x1x128xf16>) -> tensor<1x8x4097x128xf16>
    %32 = kn.transpose %29 {permutation = array<i64: 0, 1, 3, 2>} : tensor<1x8x4097x128xf16> -> tensor<1x8x128x4097xf16>
    %33 = kn.reshape %21 : tensor<1x32x1x128xf16> -> tensor<1x8x4x128xf16>
    %34 = kn.matmul %33, %32 : (tensor<1x8x4x128xf16>, tensor<1x8x128x4097xf16>) -> tensor<1x8x4x4097xf16>
    %35 = kn.constant 0.08837890625 : tensor<1x1x1x1xf16>
    %36 = kn.mul %34, %35 : (tensor<1x8x4x4097xf16>, tensor<1x1x1x1xf16>) -> tensor<1x8x4x4097xf16>
    %37 = kn.reduce_max %36 {dim = 3 : i64} : tensor<1x8x4x4097xf16> -> tensor<1x8x4x1xf16>
    %38 = kn.sub %36, %37 : (tensor<1x8x4x4097xf16>, tensor<1x8x4x1xf16>) -> tensor<1x8x4x4097xf16>
    %39 = kn.exp %38 : tensor<1x8x4x4097xf16> -> tensor<1x8x4x4097xf16>
    %40 = kn.reduction %39 {dim = 3 : i64} : tensor<1x8x4x4097xf16> -> tensor<1x8x4x1xf16>
    %41 = kn.div %39, %40 : (tensor<1x8x4x4097xf16>, tensor<1x8x4x1xf16>) -> tensor<1x8x4x4097xf16>
    %42 = kn.matmul %41, %31 : (tensor<1x8x4x4097xf16>, tensor<1x8x4097x128xf16>) -> tensor<1x8x4x128xf16>
    %43 = kn.reshape %42 : tensor<1x8x4x128xf16> -> tensor<1x4096xf16>
    %44 = kn.matmul %43, %arg9 : (tensor<1x4096xf16>, tensor<4096x4096xf16>) -> tensor<1x4096xf16>
    %45 = kn.reshape %44 : tensor<1x4096xf16> -> tensor<1x1x4096xf16>
    %46 = kn.add %arg0, %45 : (tensor<1x1x4096xf16>, tensor<1x1x4096xf16>) -> tensor<1x1x4096xf16>
    %47 = kn.square %46 : tensor<1x1x4096xf16> -> tensor<1x1x4096xf16>
    %48 = kn.reduction %47 {dim = 2 : i64} : tensor<1x1x4096xf16> -> tensor<1x1x1xf16>
    %49 = kn.mul %48, %2 : (tensor<1x1x1xf16>, tensor<1x1x1xf16>) -> tensor<1x1x1xf16>
    %50 = kn.add %49, %4 : (tensor<1x1x1xf16>, tensor<1x1x1xf16>) -> tensor<1x1x1xf16>
    %51 = kn.rsqrt %50 : tensor<1x1x1xf16> -> tensor<1x1x1xf16>
    %52 = kn.mul %46, %51 : (tensor<1x1x4096xf16>, tensor<1x1x1xf16>) -> tensor<1x1x4096xf16>
    %53 = kn.mul %arg10, %52 : (tensor<1x1x4096xf16>, tensor<1x1x4096xf16>) -> tensor<1x1x4096xf16>
    %54 = kn.reshape %53 : tensor<1x1x4096xf16> -> tensor<1x4096xf16>
    %55 = kn.matmul %54, %arg11 : (tensor<1x4096xf16>, tensor<4096x14336xf16>) -> tensor<1x14336xf16>
    %56 = kn.silu %55 : tensor<1x14336xf16> -> tensor<1x14336xf16>
    %57 = kn.matmul %54, %arg12 : (tensor<1x4096xf16>, tensor<4096x14336xf16>) -> tensor<1x14336xf16>
    %58 = kn.mul %56, %57 : (tensor<1x14336xf16>, tensor<1x14336xf16>) -> tensor<1x14336xf16>
    %59 = kn.matmul %58, %arg13 : (tensor<1x14336xf16>, tensor<14336x4096xf16>) -> tensor<1x4096xf16>
    %60 = kn.reshape %59 : tensor<1x4096xf16> -> tensor<1x1x4096xf16>
    %61 = kn.add %46, %60 : (tensor<1x1x4096xf16>, tensor<1x1x4096xf16>) -> tensor<1x1x4096xf16>
    return %29, %31, %61 : tensor<1x8x4097x128xf16>, tensor<1x8x4097x128xf16>, tensor<1x1x4096xf16>
  }
}
