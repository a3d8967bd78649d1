#compdef transduce

_transduce_completion() {
  eval $(env _TYPER_COMPLETE_ARGS="${words[1,$CURRENT]}" _TRANSDUCE_COMPLETE=complete_zsh transduce)
}

compdef _transduce_completion transduce
