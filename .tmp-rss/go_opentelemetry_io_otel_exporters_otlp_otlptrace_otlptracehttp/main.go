package main

import (
	"os"
	"time"

	_ "go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
)

func main() {
	if len(os.Args) > 1 {
		time.Sleep(3 * time.Second)
	}
}
