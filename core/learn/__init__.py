"""Learning aids: the journey of a sentence, the guided tour, the quiz, the references, and their
figures."""
