//go:build !unix

package assets

import (
	"context"
	"errors"
)

func lock(context.Context, string, func()) (func(), error) {
	return nil, errors.New("the asset cache needs file locks, which kfsm supports only on Unix systems")
}
