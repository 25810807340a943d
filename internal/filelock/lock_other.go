//go:build !unix

package filelock

import (
	"context"
	"errors"
)

func Lock(context.Context, string, func()) (func(), error) {
	return nil, errors.New("kfsm's caches need file locks, which kfsm supports only on Unix systems")
}
