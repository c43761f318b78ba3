package main
import _ "github.com/bufbuild/protocompile"
func main(){}
