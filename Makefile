# Release builds: static binaries with the version stamped in.
#   make release VERSION=v0.2.0
# Development needs none of this: go build ./cmd/canifinetune, go test ./...

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
LDFLAGS := -s -w -X github.com/canifinetune/canifinetune/internal/cli.version=$(VERSION)

.PHONY: build release test clean

build:
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o dist/canifinetune ./cmd/canifinetune

release:
	@for p in $(PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; \
		out=dist/canifinetune-$(VERSION)-$$os-$$arch; \
		echo "build $$out"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -ldflags '$(LDFLAGS)' -o $$out ./cmd/canifinetune || exit 1; \
	done
	cd dist && sha256sum canifinetune-$(VERSION)-* > canifinetune-$(VERSION).sha256

test:
	go test ./...

clean:
	rm -rf dist
