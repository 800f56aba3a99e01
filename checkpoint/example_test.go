package checkpoint_test

import (
	"bytes"
	"fmt"

	"github.com/godist/godist/checkpoint"
	"github.com/godist/godist/tensor"
)

func Example() {
	state := map[string]*tensor.Tensor{
		"fc.weight": tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3),
		"fc.bias":   tensor.FromFloat32([]float32{0.5, -0.5}, 2),
	}
	var buf bytes.Buffer // or checkpoint.SaveFile("model.safetensors", ...)
	if err := checkpoint.Save(&buf, state, map[string]string{"epoch": "3"}); err != nil {
		panic(err)
	}
	fmt.Printf("%s\n", bytes.TrimRight(buf.Bytes()[8:buf.Len()-32], " "))

	loaded, meta, err := checkpoint.Load(&buf)
	if err != nil {
		panic(err)
	}
	fmt.Println(loaded["fc.weight"], meta["epoch"])
	// Output:
	// {"__metadata__":{"epoch":"3","godist.crc32c":"7db4d993","godist.crc32c.fc.bias":"99b52d36","godist.crc32c.fc.weight":"805104b9"},"fc.bias":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"fc.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[8,32]}}
	// tensor(float32[2 3] [1 2 3 4 5 6]) 3
}
