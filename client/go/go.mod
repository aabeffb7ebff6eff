module leased/lease

go 1.19

// The versions Debian 12 packages (golang-google-grpc-dev,
// golang-google-protobuf-dev), which the project builds against.
require (
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
)
