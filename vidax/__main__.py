from vidax.cli import main

main()
